"""The run's configuration: frozen dataclasses read from TOML and --set."""
