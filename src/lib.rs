//! Placeholder library of the unpublished root package.
