"""`testbed run`: one experiment from topology file to a complete results folder."""
