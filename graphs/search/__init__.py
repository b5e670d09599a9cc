"""The search loop: the tree, PUCT, the graph's steps, the state machine and its result."""
