"""One module per family of formats; each turns an open binary file into an ExtractedDocument."""
