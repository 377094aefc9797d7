//! One connection to a message bus: connect over a unix socket, authenticate (SASL `EXTERNAL`,
//! the caller's uid), `Hello`, then method calls and signals.
//!
//! The connection has one owner and no background task: a call writes its message and reads
//! until its reply comes; signals read meanwhile wait in a queue of at most
//! [`MAX_QUEUED_SIGNALS`] (the oldest is dropped, and counted, when it is full) for
//! [`Connection::next_signal`]. A malformed or oversized message ends the connection with a
//! [`DbusError::Malformed`]; every later use says so.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::message::{frame_length, Kind, Message, FIXED_HEADER_BYTES, FLAG_NO_REPLY_EXPECTED};
use super::value::Value;
use super::DbusError;

/// The system bus when `DBUS_SYSTEM_BUS_ADDRESS` is not set.
pub const DEFAULT_SYSTEM_BUS: &str = "unix:path=/run/dbus/system_bus_socket";
/// Signals kept while nobody reads them.
pub const MAX_QUEUED_SIGNALS: usize = 64;
/// How long a method call waits for its reply.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(25);
/// Longest line of the authentication exchange.
const MAX_AUTH_LINE_BYTES: usize = 512;

const BUS_NAME: &str = "org.freedesktop.DBus";
const BUS_PATH: &str = "/org/freedesktop/DBus";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";

/// The system bus's address: `$DBUS_SYSTEM_BUS_ADDRESS`, else [`DEFAULT_SYSTEM_BUS`].
pub fn system_bus_address() -> String {
    std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
        .ok()
        .filter(|a| !a.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_SYSTEM_BUS.to_string())
}

/// The socket paths of a D-Bus address (`unix:path=…` entries, `;`-separated, `%xx`-escaped).
pub fn socket_paths(address: &str) -> Result<Vec<PathBuf>, DbusError> {
    let mut paths = Vec::new();
    for entry in address.split(';').filter(|e| !e.is_empty()) {
        let Some(params) = entry.strip_prefix("unix:") else {
            continue;
        };
        for param in params.split(',') {
            if let Some(path) = param.strip_prefix("path=") {
                paths.push(PathBuf::from(unescape(path)?));
            }
        }
    }
    if paths.is_empty() {
        return Err(DbusError::Address(format!(
            "{address:?} has no unix:path= entry (pincer connects to unix socket paths only)"
        )));
    }
    Ok(paths)
}

fn unescape(value: &str) -> Result<String, DbusError> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| DbusError::Address(format!("bad %-escape in {value:?}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| DbusError::Address(format!("{value:?} is not UTF-8")))
}

/// A connection to a message bus.
pub struct Connection {
    stream: UnixStream,
    next_serial: u32,
    unique_name: String,
    signals: VecDeque<Message>,
    dropped_signals: u64,
    /// Why the connection can no longer be used.
    broken: Option<String>,
}

impl Connection {
    /// Connects to the system bus.
    pub async fn system() -> Result<Connection, DbusError> {
        Connection::connect(&system_bus_address()).await
    }

    /// Connects to the bus at `address`, authenticates and says `Hello`.
    pub async fn connect(address: &str) -> Result<Connection, DbusError> {
        let mut last = None;
        for path in socket_paths(address)? {
            match UnixStream::connect(&path).await {
                Ok(stream) => return Connection::start(stream).await,
                Err(source) => last = Some((path, source)),
            }
        }
        let (path, source) = last.ok_or_else(|| DbusError::Address(address.to_string()))?;
        Err(DbusError::Connect { path, source })
    }

    /// Authenticates on a connected stream and says `Hello`.
    pub async fn start(mut stream: UnixStream) -> Result<Connection, DbusError> {
        tokio::time::timeout(CALL_TIMEOUT, authenticate(&mut stream))
            .await
            .map_err(|_| DbusError::Auth("the bus did not answer the authentication".into()))??;
        let mut connection = Connection {
            stream,
            next_serial: 1,
            unique_name: String::new(),
            signals: VecDeque::new(),
            dropped_signals: 0,
            broken: None,
        };
        let reply = connection
            .call(Message::method_call(
                BUS_NAME,
                BUS_PATH,
                BUS_NAME,
                "Hello",
                vec![],
            ))
            .await?;
        connection.unique_name = reply
            .first()
            .and_then(Value::as_str)
            .ok_or_else(|| DbusError::UnexpectedReply("Hello answered without a name".into()))?
            .to_string();
        Ok(connection)
    }

    /// The name the bus gave this connection.
    pub fn unique_name(&self) -> &str {
        &self.unique_name
    }

    /// Signals dropped because the queue was full.
    pub fn dropped_signals(&self) -> u64 {
        self.dropped_signals
    }

    /// Calls a method and waits (at most [`CALL_TIMEOUT`]) for its reply's arguments. An error
    /// reply is [`DbusError::Remote`] with its name and text.
    pub async fn call(&mut self, mut call: Message) -> Result<Vec<Value>, DbusError> {
        let method = format!(
            "{}.{}",
            call.interface.as_deref().unwrap_or_default(),
            call.member.as_deref().unwrap_or_default()
        );
        let serial = self.send(&mut call).await?;
        let reply = tokio::time::timeout(CALL_TIMEOUT, self.read_reply(serial))
            .await
            .map_err(|_| DbusError::Timeout {
                method: method.clone(),
                secs: CALL_TIMEOUT.as_secs(),
            })??;
        match reply.kind {
            Kind::Error => Err(DbusError::Remote {
                name: reply.error_name.clone().unwrap_or_default(),
                message: reply.error_text(),
            }),
            _ => Ok(reply.body),
        }
    }

    /// The next signal: a queued one, else the next to arrive within `timeout` (`None` when
    /// none did).
    pub async fn next_signal(&mut self, timeout: Duration) -> Result<Option<Message>, DbusError> {
        if let Some(signal) = self.signals.pop_front() {
            return Ok(Some(signal));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let message = match tokio::time::timeout_at(deadline, self.read_message()).await {
                Ok(message) => message?,
                Err(_) => return Ok(None),
            };
            match message.kind {
                Kind::Signal => return Ok(Some(message)),
                Kind::MethodCall => self.refuse_call(&message).await?,
                // A late reply to a call that timed out.
                Kind::MethodReturn | Kind::Error => {}
            }
        }
    }

    /// Asks the bus to route signals matching `rule` here.
    pub async fn add_match(&mut self, rule: &str) -> Result<(), DbusError> {
        self.call(Message::method_call(
            BUS_NAME,
            BUS_PATH,
            BUS_NAME,
            "AddMatch",
            vec![Value::str(rule)],
        ))
        .await
        .map(drop)
    }

    /// `org.freedesktop.DBus.Properties.Get`: one property's value (variant unwrapped).
    pub async fn get_property(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
        name: &str,
    ) -> Result<Value, DbusError> {
        let reply = self
            .call(Message::method_call(
                destination,
                path,
                PROPERTIES,
                "Get",
                vec![Value::str(interface), Value::str(name)],
            ))
            .await?;
        reply
            .into_iter()
            .next()
            .map(|v| v.unwrap_variant().clone())
            .ok_or_else(|| DbusError::UnexpectedReply(format!("Get {name} answered nothing")))
    }

    /// `org.freedesktop.DBus.Properties.GetAll`: every property of an interface.
    pub async fn get_all_properties(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
    ) -> Result<Vec<(String, Value)>, DbusError> {
        let reply = self
            .call(Message::method_call(
                destination,
                path,
                PROPERTIES,
                "GetAll",
                vec![Value::str(interface)],
            ))
            .await?;
        let dict = reply
            .first()
            .and_then(Value::as_string_dict)
            .ok_or_else(|| DbusError::UnexpectedReply("GetAll answered no a{sv}".into()))?;
        Ok(dict
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.unwrap_variant().clone()))
            .collect())
    }

    async fn send(&mut self, message: &mut Message) -> Result<u32, DbusError> {
        self.check_usable()?;
        let serial = self.next_serial;
        self.next_serial = self.next_serial.checked_add(1).unwrap_or(1);
        message.serial = serial;
        let bytes = message.encode().map_err(DbusError::Encode)?;
        if let Err(error) = self.stream.write_all(&bytes).await {
            self.broken = Some(format!("write failed: {error}"));
            return Err(DbusError::Io(error));
        }
        Ok(serial)
    }

    async fn read_reply(&mut self, serial: u32) -> Result<Message, DbusError> {
        loop {
            let message = self.read_message().await?;
            match message.kind {
                Kind::MethodReturn | Kind::Error if message.reply_serial == Some(serial) => {
                    return Ok(message)
                }
                Kind::Signal => self.queue_signal(message),
                Kind::MethodCall => self.refuse_call(&message).await?,
                // A late reply to an earlier call that timed out.
                Kind::MethodReturn | Kind::Error => {}
            }
        }
    }

    fn queue_signal(&mut self, signal: Message) {
        if self.signals.len() >= MAX_QUEUED_SIGNALS {
            self.signals.pop_front();
            self.dropped_signals += 1;
        }
        self.signals.push_back(signal);
    }

    /// Nothing is exported on this connection: a call to it gets `UnknownMethod`.
    async fn refuse_call(&mut self, call: &Message) -> Result<(), DbusError> {
        if call.flags & FLAG_NO_REPLY_EXPECTED != 0 {
            return Ok(());
        }
        let mut reply = Message::error_reply(
            call,
            "org.freedesktop.DBus.Error.UnknownMethod",
            "pincer exports no objects",
        );
        self.send(&mut reply).await.map(drop)
    }

    fn check_usable(&self) -> Result<(), DbusError> {
        match &self.broken {
            Some(why) => Err(DbusError::Closed(why.clone())),
            None => Ok(()),
        }
    }

    async fn read_message(&mut self) -> Result<Message, DbusError> {
        self.check_usable()?;
        let result = read_message(&mut self.stream).await;
        if let Err(error) = &result {
            self.broken = Some(error.to_string());
        }
        result
    }
}

/// Reads one message: the fixed header, then exactly the length it announces (refused first
/// when over the cap).
async fn read_message(stream: &mut UnixStream) -> Result<Message, DbusError> {
    let mut head = [0u8; FIXED_HEADER_BYTES];
    read_exact(stream, &mut head).await?;
    // At least the 16 bytes already read: the header's length counts them.
    let total = frame_length(&head).map_err(DbusError::Malformed)?;
    let mut bytes = vec![0u8; total];
    bytes[..FIXED_HEADER_BYTES].copy_from_slice(&head);
    read_exact(stream, &mut bytes[FIXED_HEADER_BYTES..]).await?;
    Message::decode(&bytes).map_err(DbusError::Malformed)
}

async fn read_exact(stream: &mut UnixStream, buf: &mut [u8]) -> Result<(), DbusError> {
    match stream.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(DbusError::Closed("the bus closed the connection".into()))
        }
        Err(e) => Err(DbusError::Io(e)),
    }
}

/// SASL `EXTERNAL` with this process's uid, then `BEGIN`.
async fn authenticate(stream: &mut UnixStream) -> Result<(), DbusError> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let line = format!("\0AUTH EXTERNAL {}\r\n", hex::encode(uid.to_string()));
    stream
        .write_all(line.as_bytes())
        .await
        .map_err(DbusError::Io)?;
    let answer = read_auth_line(stream).await?;
    if !answer.starts_with("OK ") {
        return Err(DbusError::Auth(format!(
            "the bus refused EXTERNAL authentication for uid {uid}: {answer}"
        )));
    }
    stream.write_all(b"BEGIN\r\n").await.map_err(DbusError::Io)
}

/// One `\r\n`-terminated line, byte by byte so nothing after it is consumed.
async fn read_auth_line(stream: &mut UnixStream) -> Result<String, DbusError> {
    let mut line = Vec::new();
    loop {
        let byte = match stream.read_u8().await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(DbusError::Auth(
                    "the bus closed the connection while authenticating".into(),
                ))
            }
            Err(e) => return Err(DbusError::Io(e)),
        };
        line.push(byte);
        if line.ends_with(b"\r\n") {
            line.truncate(line.len() - 2);
            return Ok(String::from_utf8_lossy(&line).into_owned());
        }
        if line.len() > MAX_AUTH_LINE_BYTES {
            return Err(DbusError::Auth(format!(
                "authentication line longer than {MAX_AUTH_LINE_BYTES} bytes"
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_give_their_unix_paths() {
        assert_eq!(
            socket_paths("unix:path=/run/dbus/system_bus_socket").expect("path"),
            vec![PathBuf::from("/run/dbus/system_bus_socket")]
        );
        assert_eq!(
            socket_paths("tcp:host=x,port=1;unix:path=/tmp/a%20b,guid=ab").expect("second"),
            vec![PathBuf::from("/tmp/a b")]
        );
        let error = socket_paths("unix:abstract=/tmp/x")
            .expect_err("abstract")
            .to_string();
        assert!(error.contains("unix:path="), "{error}");
        assert!(socket_paths("unix:path=/a%zz").is_err());
    }

    async fn pair() -> (UnixStream, UnixStream) {
        UnixStream::pair().expect("socketpair")
    }

    /// A peer that answers authentication and `Hello`, then runs `then` on the raw socket.
    async fn fake_bus(mut peer: UnixStream, then: Vec<Vec<u8>>) {
        handshake(&mut peer).await;
        for raw in then {
            peer.write_all(&raw).await.expect("raw");
        }
        // Keep the socket open until the client is done.
        let mut sink = Vec::new();
        let _ = peer.read_to_end(&mut sink).await;
    }

    /// Authentication and `Hello`, as a bus answers them.
    async fn handshake(peer: &mut UnixStream) {
        let mut nul = [0u8; 1];
        peer.read_exact(&mut nul).await.expect("nul");
        let line = read_auth_line(peer).await.expect("auth line");
        assert!(line.starts_with("AUTH EXTERNAL "), "{line}");
        peer.write_all(b"OK 0123456789abcdef0123456789abcdef\r\n")
            .await
            .expect("ok");
        assert_eq!(read_auth_line(peer).await.expect("begin"), "BEGIN");
        let hello = read_message(peer).await.expect("hello");
        let mut reply = Message::method_return(&hello, vec![Value::str(":1.42")]);
        reply.serial = 1;
        peer.write_all(&reply.encode().expect("enc"))
            .await
            .expect("hello reply");
    }

    #[tokio::test]
    async fn a_call_addressed_to_pincer_is_answered_unknown_method() {
        let (ours, mut peer) = pair().await;
        let bus = tokio::spawn(async move {
            handshake(&mut peer).await;
            let mut call = Message::method_call(":1.42", "/x", "org.example.Peer", "Ping", vec![]);
            call.serial = 5;
            call.sender = Some(":1.7".into());
            peer.write_all(&call.encode().expect("enc"))
                .await
                .expect("call");
            let reply = read_message(&mut peer).await.expect("reply");
            peer.write_all(&signal(6, 1)).await.expect("signal");
            let mut sink = Vec::new();
            let _ = peer.read_to_end(&mut sink).await;
            reply
        });
        let mut c = Connection::start(ours).await.expect("start");
        let signal = c.next_signal(Duration::from_secs(5)).await.expect("read");
        assert_eq!(signal.map(|s| s.serial), Some(6));
        drop(c);
        let reply = bus.await.expect("bus");
        assert_eq!(reply.kind, Kind::Error);
        assert_eq!(reply.reply_serial, Some(5));
        assert_eq!(reply.destination.as_deref(), Some(":1.7"));
        assert_eq!(
            reply.error_name.as_deref(),
            Some("org.freedesktop.DBus.Error.UnknownMethod")
        );
    }

    fn signal(serial: u32, n: i32) -> Vec<u8> {
        let mut s = Message::signal(
            "/",
            "de.pengutronix.rauc.Installer",
            "Completed",
            vec![Value::Int32(n)],
        );
        s.serial = serial;
        s.encode().expect("enc")
    }

    #[tokio::test]
    async fn hello_gives_the_unique_name_and_signals_queue_up_to_the_cap() {
        let (ours, peer) = pair().await;
        let flood: Vec<Vec<u8>> = (0..100).map(|i| signal(10 + i as u32, i)).collect();
        let bus = tokio::spawn(fake_bus(peer, flood));
        let mut c = Connection::start(ours).await.expect("start");
        assert_eq!(c.unique_name(), ":1.42");
        let mut seen = Vec::new();
        while let Some(s) = c
            .next_signal(Duration::from_millis(300))
            .await
            .expect("signal")
        {
            seen.push(s.body[0].as_i64().expect("int"));
        }
        assert_eq!(seen.len(), 100, "read one by one, nothing is dropped");
        drop(c);
        bus.await.expect("bus");
    }

    #[tokio::test]
    async fn signals_arriving_during_a_call_are_capped_oldest_first() {
        let (ours, peer) = pair().await;
        let mut raw: Vec<Vec<u8>> = (0..100).map(|i| signal(10 + i as u32, i)).collect();
        let call = Message {
            serial: 2,
            ..Message::method_call("a.b", "/", "a.b", "M", vec![])
        };
        let mut reply = Message::error_reply(&call, "org.freedesktop.DBus.Error.Failed", "nope");
        reply.serial = 200;
        raw.push(reply.encode().expect("enc"));
        let bus = tokio::spawn(fake_bus(peer, raw));
        let mut c = Connection::start(ours).await.expect("start");
        let error = c
            .call(Message::method_call("a.b", "/", "a.b", "M", vec![]))
            .await
            .expect_err("error reply");
        match error {
            DbusError::Remote { name, message } => {
                assert_eq!(name, "org.freedesktop.DBus.Error.Failed");
                assert_eq!(message, "nope");
            }
            other => panic!("{other}"),
        }
        assert_eq!(c.dropped_signals(), 100 - MAX_QUEUED_SIGNALS as u64);
        let first = c
            .next_signal(Duration::from_millis(100))
            .await
            .expect("q")
            .expect("some");
        assert_eq!(first.body[0].as_i64(), Some(36), "the oldest were dropped");
        drop(c);
        bus.await.expect("bus");
    }

    #[tokio::test]
    async fn a_malformed_message_is_an_error_and_ends_the_connection() {
        let (ours, peer) = pair().await;
        let mut garbage = signal(10, 1);
        garbage[0] = b'X';
        let bus = tokio::spawn(fake_bus(peer, vec![garbage]));
        let mut c = Connection::start(ours).await.expect("start");
        let error = c
            .next_signal(Duration::from_secs(5))
            .await
            .expect_err("bad bom");
        assert!(matches!(error, DbusError::Malformed(_)), "{error}");
        assert!(error.to_string().contains("byte-order"), "{error}");
        let again = c
            .next_signal(Duration::from_millis(10))
            .await
            .expect_err("broken");
        assert!(matches!(again, DbusError::Closed(_)), "{again}");
        drop(c);
        bus.await.expect("bus");
    }

    #[tokio::test]
    async fn an_oversized_message_is_refused_before_it_is_read() {
        let (ours, peer) = pair().await;
        let mut head = vec![b'l', 4, 0, 1];
        head.extend_from_slice(&(64 * 1024 * 1024u32).to_le_bytes());
        head.extend_from_slice(&5u32.to_le_bytes());
        head.extend_from_slice(&0u32.to_le_bytes());
        let bus = tokio::spawn(fake_bus(peer, vec![head]));
        let mut c = Connection::start(ours).await.expect("start");
        let error = c
            .next_signal(Duration::from_secs(5))
            .await
            .expect_err("too big");
        assert!(
            error.to_string().contains("over the 1048576-byte limit"),
            "{error}"
        );
        drop(c);
        bus.await.expect("bus");
    }
}
