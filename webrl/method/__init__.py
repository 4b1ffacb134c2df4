"""The method's pure pieces: the hyperparameter record and presets, returns and advantages, rewards, paired
statistics."""
