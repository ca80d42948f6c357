def note_priced_v2_to_v1(payload: dict) -> dict:
    """v2 without its count of words: what a reader of v1 takes, while EVENT_VERSIONS pins v1."""
    return {name: value for name, value in payload.items() if name != "words"}
