//! pincer host library.
