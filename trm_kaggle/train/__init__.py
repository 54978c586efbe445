"""Training: data loading, the training loop and its checkpoints."""
