"""From audio files to normalised log-mel frames: decoding, resampling, filterbanks and augmentation."""
