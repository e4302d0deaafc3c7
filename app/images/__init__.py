"""Images attached to messages, prepared for vision models (app.images.prepare)."""
