//! [`ConnEvent`]: what happened to a connection, with librpma's values and
//! strings (a leaf: errors name it too).

use std::fmt;

/// Connection events (`enum rpma_conn_event`), with librpma's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
#[non_exhaustive]
pub enum ConnEvent {
    /// No event yet (`RPMA_CONN_UNDEFINED`).
    Undefined = -1,
    /// The connection is up.
    Established = 0,
    /// The connection was closed by either side.
    Closed = 1,
    /// The connection was lost (connect error, device removal).
    Lost = 2,
    /// The other side rejected the connection.
    Rejected = 3,
    /// The other side could not be reached.
    Unreachable = 4,
}

/// librpma's `rpma_utils_conn_event_2str`.
///
/// ```
/// use rpma::conn::{conn_event_2str, ConnEvent};
/// assert_eq!(conn_event_2str(ConnEvent::Established), "Connection established");
/// ```
pub fn conn_event_2str(ev: ConnEvent) -> &'static str {
    match ev {
        ConnEvent::Undefined => "Undefined connection event",
        ConnEvent::Established => "Connection established",
        ConnEvent::Closed => "Connection closed",
        ConnEvent::Lost => "Connection lost",
        ConnEvent::Rejected => "Connection rejected",
        ConnEvent::Unreachable => "Connection unreachable",
    }
}

/// The string librpma gives for a raw event value, including
/// "Unsupported connection event" for values it does not know.
///
/// ```
/// use rpma::conn::{conn_event_value_2str, ConnEvent};
/// assert_eq!(conn_event_value_2str(ConnEvent::Closed as i32), "Connection closed");
/// assert_eq!(conn_event_value_2str(7), "Unsupported connection event");
/// ```
pub fn conn_event_value_2str(value: i32) -> &'static str {
    match value {
        -1 => conn_event_2str(ConnEvent::Undefined),
        0 => conn_event_2str(ConnEvent::Established),
        1 => conn_event_2str(ConnEvent::Closed),
        2 => conn_event_2str(ConnEvent::Lost),
        3 => conn_event_2str(ConnEvent::Rejected),
        4 => conn_event_2str(ConnEvent::Unreachable),
        _ => "Unsupported connection event",
    }
}

impl fmt::Display for ConnEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(conn_event_2str(*self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_strings_match_librpma() {
        assert_eq!(conn_event_value_2str(-1), "Undefined connection event");
        assert_eq!(conn_event_value_2str(0), "Connection established");
        assert_eq!(conn_event_value_2str(1), "Connection closed");
        assert_eq!(conn_event_value_2str(2), "Connection lost");
        assert_eq!(conn_event_value_2str(3), "Connection rejected");
        assert_eq!(conn_event_value_2str(4), "Connection unreachable");
        assert_eq!(conn_event_value_2str(5), "Unsupported connection event");
        assert_eq!(ConnEvent::Lost.to_string(), "Connection lost");
        assert_eq!(ConnEvent::Unreachable as i32, 4);
    }
}
