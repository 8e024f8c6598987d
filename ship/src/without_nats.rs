//! A build without the `nats` feature: the same [`ship`] and [`follow`] entry points, which
//! connect to nothing and return [`Error::WithoutNats`]. The flags and configs they take are
//! [`crate::config`]'s, compiled either way.

/// `culprit ship` without a NATS client.
pub mod ship {
    use crate::config::ShipConfig;
    use crate::error::Error;

    /// Returns [`Error::WithoutNats`]: this build cannot ship.
    pub fn run(_cfg: &ShipConfig) -> Result<(), Error> {
        Err(Error::WithoutNats)
    }
}

/// The follower behind `diagnose --follow nats://…`, without a NATS client.
pub mod follow {
    use std::path::Path;
    use std::time::Duration;

    use crate::config::FollowConfig;
    use crate::error::Error;

    /// A follower, of which this build has none: [`Follower::start`] always fails, so no
    /// value of this type exists and its methods cannot be called.
    #[derive(Debug)]
    pub enum Follower {}

    impl Follower {
        /// Returns [`Error::WithoutNats`]: this build cannot follow a broker.
        pub fn start(_cfg: FollowConfig) -> Result<Follower, Error> {
            Err(Error::WithoutNats)
        }

        /// The mirror root.
        pub fn root(&self) -> &Path {
            match *self {}
        }

        /// Waits for the group's nodes.
        pub fn wait_for_nodes(&self, _settle: Duration) -> Result<usize, Error> {
            match *self {}
        }

        /// Publishes one verdict line.
        pub fn publish_verdict(&self, _line: Vec<u8>) {
            match *self {}
        }

        /// Stops mirroring.
        pub fn finish(self, _timeout: Duration) {
            match self {}
        }
    }
}
