"""Decide what to train next: the genes, the GA's operators, the strategies, early stopping, and the record of each evaluation."""
