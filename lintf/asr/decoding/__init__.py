"""From per-frame label scores to text: CTC greedy and beam search, a character n-gram LM, the options."""
