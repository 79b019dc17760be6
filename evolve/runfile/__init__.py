"""The run file: the checkpoint, its evaluation segments, the in-flight log, and atomic temporary files."""
