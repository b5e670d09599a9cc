"""Training a forecaster model on measured pairs: data, prompt, runs by proper scoring rule or GRPO."""
