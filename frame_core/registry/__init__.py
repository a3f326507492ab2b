"""frame_core.registry package."""
