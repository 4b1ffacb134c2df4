"""The trainer service: SFT, WebRL critic and actor training, replay, checkpoint publishing."""
