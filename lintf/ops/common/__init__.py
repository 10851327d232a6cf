"""What the ops share: argument checks, the accumulation dtype, double backward through PyTorch, the CPU runtime."""
