"""frame_core.compiler/passes package."""
