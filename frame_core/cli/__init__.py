"""frame_core.cli package."""
