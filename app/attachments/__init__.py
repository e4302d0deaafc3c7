"""Files that messages hold (documents, images), stored once by content."""
