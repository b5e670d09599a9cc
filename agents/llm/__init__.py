"""The one LLM client and the prompt pieces every LLM agent shares."""
