"""frame_core.testing package."""
