"""The model library: installed models, the Hugging Face Hub client, downloads, model operations
and the Hub token."""
