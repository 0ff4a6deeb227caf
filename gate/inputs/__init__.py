"""What a run is given: the config, the suite, the model pair and the fingerprints of all three."""
