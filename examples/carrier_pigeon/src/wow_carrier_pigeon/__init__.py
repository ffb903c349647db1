"""wow-carrier-pigeon: an example transport plugin for wow-py."""
