"""The LangGraph state machine: state, nodes, routing policy, PUCT search tree, budget."""
