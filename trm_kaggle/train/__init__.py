"""Training: the loop, its settings (presets and overrides), schedules, runtime and train states."""
