"""Stand-in package (dcpp tests): upstream module paths, written from the contract."""
