"""frame_core.ir package."""
