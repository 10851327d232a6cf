# Lets `pytest plugins/lintf-softplus` import lintf_softplus without installing the package.
