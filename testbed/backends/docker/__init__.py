"""Docker backend: containers as nodes, the engine, and the node image built offline."""
