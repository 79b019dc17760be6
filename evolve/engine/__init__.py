"""The master's engine: the search loop, its dispatch of tasks to workers, and the simulator that runs it on a virtual clock."""
