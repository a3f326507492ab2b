"""frame_core.compiler package."""
