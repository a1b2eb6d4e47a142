"""Nightly regression suites: a suite file, nights of repetitions, a history and a statistical verdict."""
