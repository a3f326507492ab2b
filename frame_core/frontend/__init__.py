"""frame_core.frontend package."""
