//! Verbs loopback (feature `verbs`): placeholder, filled below.
