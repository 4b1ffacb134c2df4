"""Which policy a rollout runs: policies from their JSON spec, and the actor service as its clients reach it."""
