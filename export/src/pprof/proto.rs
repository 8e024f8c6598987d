//! The messages of pprof's `profile.proto` (package `perftools.profiles`, proto3) that culprit
//! writes, declared for prost's derive: prost does the encoding. Field numbers are the
//! format's; fields culprit never sets are left out (a reader sees them unset, as proto3
//! allows). Strings are indices into [`Profile::string_table`], whose entry 0 is `""`.

/// A whole profile.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Profile {
    /// What each value of a sample measures (type and unit).
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples: a stack, its values, its labels.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Binary images.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Program locations (here: one per function).
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string, once; entry 0 is empty.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Start of the data, ns since the epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Length of the data, ns.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What a sampling period counts.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Events per sample.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-text comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown by default (string index of its type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// A value's type and unit (string indices).
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub(crate) struct ValueType {
    /// E.g. `calls`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// E.g. `count`, `nanoseconds`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// A stack with its values.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels (node, program, pid).
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A label: a string or a number under a key (string indices).
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub(crate) struct Label {
    /// Key.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String value.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
}

/// A binary image.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub(crate) struct Mapping {
    /// Id (1, 2, …).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Image name.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// The locations are named already: readers need not symbolize.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

/// A program location.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Location {
    /// Id (1, 2, …).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its image.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The function(s) at it.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// A function at a location.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub(crate) struct Line {
    /// The function.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
}

/// A function.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub(crate) struct Function {
    /// Id (1, 2, …).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Name for people (demangled).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Name as in the binary.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Source file (here: the image).
    #[prost(int64, tag = "4")]
    pub filename: i64,
}
