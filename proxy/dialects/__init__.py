"""Client dialects by name; each turns its wire format into a Conversation and a Generation back."""
