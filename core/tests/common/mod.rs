pub mod munged;
