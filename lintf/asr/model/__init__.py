"""The speech model: convolutional front end, depthwise-convolution blocks, the CTC task."""
