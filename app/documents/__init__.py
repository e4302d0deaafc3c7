"""Documents: files people attach and folders they collect, cut into passages and retrieved for a question."""
