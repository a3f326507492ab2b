"""frame_core.runtime package."""
