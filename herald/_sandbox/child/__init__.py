"""child."""
