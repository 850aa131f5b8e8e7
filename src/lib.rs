//! Cluster API add-on provider for Fleet.
