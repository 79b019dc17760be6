"""What the master and its workers say to each other, and how: messages, the binary result header, MPI, the worker loop."""
