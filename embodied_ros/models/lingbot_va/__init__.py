"""LingBot-VA-style world-action model on Wan2.2 transformer blocks."""
