//! A socket-level stand-in for WhatsApp's multi-device Web server: a WebSocket listener on loopback
//! speaking the real wire (the `WA` connection header, 3-byte length-prefixed frames, the Noise XX/IK
//! handshake with a certificate chain naming its own static key, then AES-GCM transport frames carrying
//! WhatsApp's binary XML stanzas). It plays the server and, for linking, the phone: `scan_qr` answers a
//! QR code the way the primary device does (an ADV device identity signed with the account key and
//! MAC'd with the QR's secret). Only the certificate chain's signature cannot be real (WhatsApp's root
//! key is not ours): test builds
//! enable wacore's `danger-skip-cert-chain-verify` through a dev-dependency (Cargo.toml), which `cargo build`
//! does not unify into the shipped binary.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hmac::Mac;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use whatsapp_rust::anyhow;
use whatsapp_rust::buffa::{self, Message as _};
use whatsapp_rust::wacore::handshake::NoiseHandshake;
use whatsapp_rust::wacore::libsignal::protocol::{self as signal, KeyPair};
use whatsapp_rust::wacore::noise::framing::FrameDecoder;
use whatsapp_rust::wacore::noise::NoiseCipher;
use whatsapp_rust::wacore_binary::builder::NodeBuilder;
use whatsapp_rust::wacore_binary::consts::{NOISE_PATTERN_IK, NOISE_PATTERN_XX, WA_CONN_HEADER};
use whatsapp_rust::wacore_binary::{marshal, Node, NodeContent};
use whatsapp_rust::waproto::whatsapp as wa;

/// The media CDN (uploads, downloads, WhatsApp's media encryption).
#[path = "fake_whatsapp_media.rs"]
pub mod media;

/// What the fake saw and did, for assertions.
#[derive(Default, Debug, Clone)]
pub struct FakeLog {
    pub connections: usize,
    pub registrations: usize,
    pub logins: usize,
    pub paired: Vec<String>,
    pub stanzas_in: Vec<String>,
    /// Ids of the IQ results the client sent.
    pub results: Vec<String>,
}

enum Command {
    Send(Node),
    Raw(Vec<u8>),
    Sealed(Vec<u8>),
    Close,
}

/// A certificate chain (intermediate + leaf) whose leaf names `server_static`, with WhatsApp's fields
/// and zero signatures (the client under test does not check them: see the file's head).
fn cert_chain(server_static: &[u8; 32]) -> Vec<u8> {
    use wa::cert_chain::noise_certificate::Details;
    let intermediate = Details {
        serial: Some(1),
        issuer_serial: Some(0),
        key: Some(vec![0xCC; 32]),
        not_before: Some(1_700_000_000),
        not_after: Some(4_000_000_000),
    }
    .encode_to_vec();
    let leaf = Details {
        serial: Some(2),
        issuer_serial: Some(1),
        key: Some(server_static.to_vec()),
        not_before: Some(1_700_000_000),
        not_after: Some(4_000_000_000),
    }
    .encode_to_vec();
    wa::CertChain {
        leaf: buffa::MessageField::some(wa::cert_chain::NoiseCertificate {
            details: Some(leaf),
            signature: Some(vec![0u8; 64]),
        }),
        intermediate: buffa::MessageField::some(wa::cert_chain::NoiseCertificate {
            details: Some(intermediate),
            signature: Some(vec![0u8; 64]),
        }),
    }
    .encode_to_vec()
}

struct Shared {
    log: FakeLog,
    /// Paired devices: phone number → (device id, linked), cleared by `log_out`.
    accounts: HashMap<u64, u32>,
    logged_out: bool,
    current: Option<mpsc::Sender<Command>>,
    pending_pair_ids: Vec<String>,
    /// The device's pre-key bundle as it uploaded it (`<iq xmlns="encrypt" type="set">`).
    bundle: Option<UploadedBundle>,
    /// Contacts' Signal state by phone number (after `send_dm`).
    contacts: HashMap<String, (ContactSessions, ContactIdentity)>,
    /// Messages the device sent, decrypted by the addressed contact: (to, id, text).
    pub sent: Vec<(String, String, String)>,
    /// Outgoing `<message>` stanzas that could not be read.
    pub unreadable: Vec<String>,
    /// Groups the fake hosts: group JID → members' phone numbers (the device's own is added).
    groups: HashMap<String, Vec<String>>,
    /// Contacts' sender-key stores (their own chains and the device's, once distributed).
    sender_keys: HashMap<String, ContactSenderKeys>,
    /// (contact, group) pairs whose sender key the device already has.
    distributed: std::collections::HashSet<(String, String)>,
    /// Group messages the device sent, as each member decrypted them: (group, member, id, text).
    group_sent: Vec<(String, String, String, String)>,
    /// `<receipt>` stanzas the device sent: (type, to, id, participant).
    receipts: Vec<Receipt>,
    /// Messages the device sent as the contacts decrypted them, whole: (to, id, message).
    pub sent_messages: Vec<(String, String, wa::Message)>,
}

/// A `<receipt>` the device sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// `type` (`read`, `read-self`, …; empty for a delivery receipt).
    pub kind: String,
    pub to: String,
    pub id: String,
    pub participant: Option<String>,
}

/// A contact's sender-key records, in memory.
#[derive(Default)]
struct ContactSenderKeys(HashMap<String, signal::SenderKeyRecord>);

#[whatsapp_rust::async_trait]
impl signal::SenderKeyStore for ContactSenderKeys {
    async fn store_sender_key(
        &mut self,
        name: &signal::SenderKeyName,
        record: signal::SenderKeyRecord,
    ) -> signal::error::Result<()> {
        self.0.insert(name.cache_key().to_string(), record);
        Ok(())
    }
    async fn load_sender_key(
        &self,
        name: &signal::SenderKeyName,
    ) -> signal::error::Result<Option<signal::SenderKeyRecord>> {
        Ok(self.0.get(name.cache_key()).cloned())
    }
}

/// A device's uploaded keys: registration id, identity, one-time pre-keys, signed pre-key.
#[derive(Clone, Debug)]
pub struct UploadedBundle {
    pub registration_id: u32,
    pub identity: Vec<u8>,
    pub prekeys: Vec<(u32, Vec<u8>)>,
    pub signed_prekey: (u32, Vec<u8>, Vec<u8>),
}

fn be_u32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b))
}

fn child_bytes(node: &Node, tag: &str) -> Option<Vec<u8>> {
    match &node.get_optional_child(tag)?.content {
        Some(NodeContent::Bytes(bytes)) => Some(bytes.clone()),
        _ => None,
    }
}

fn parse_bundle(iq: &Node) -> Option<UploadedBundle> {
    let registration_id = be_u32(&child_bytes(iq, "registration")?);
    let identity = child_bytes(iq, "identity")?;
    let prekeys = iq
        .get_optional_child("list")?
        .get_children_by_tag("key")
        .filter_map(|key| Some((be_u32(&child_bytes(key, "id")?), child_bytes(key, "value")?)))
        .collect();
    let skey = iq.get_optional_child("skey")?;
    let signed_prekey = (
        be_u32(&child_bytes(skey, "id")?),
        child_bytes(skey, "value")?,
        child_bytes(skey, "signature")?,
    );
    Some(UploadedBundle {
        registration_id,
        identity,
        prekeys,
        signed_prekey,
    })
}

/// A contact's Signal-protocol sessions (the sending side of a DM), in memory.
#[derive(Default)]
struct ContactSessions(HashMap<String, signal::SessionRecord>);

#[whatsapp_rust::async_trait]
impl signal::SessionStore for ContactSessions {
    async fn load_session(
        &self,
        address: &signal::ProtocolAddress,
    ) -> signal::error::Result<Option<signal::SessionRecord>> {
        Ok(self.0.get(&address.to_string()).cloned())
    }
    async fn has_session(&self, address: &signal::ProtocolAddress) -> signal::error::Result<bool> {
        Ok(self.0.contains_key(&address.to_string()))
    }
    async fn store_session(
        &mut self,
        address: &signal::ProtocolAddress,
        record: signal::SessionRecord,
    ) -> signal::error::Result<()> {
        self.0.insert(address.to_string(), record);
        Ok(())
    }
}

/// A contact's identity, trusting every remote identity.
struct ContactIdentity {
    identity: signal::IdentityKeyPair,
    registration_id: u32,
    identities: HashMap<String, signal::IdentityKey>,
}

#[whatsapp_rust::async_trait]
impl signal::IdentityKeyStore for ContactIdentity {
    async fn get_identity_key_pair(&self) -> signal::error::Result<signal::IdentityKeyPair> {
        Ok(self.identity.clone())
    }
    async fn get_local_registration_id(&self) -> signal::error::Result<u32> {
        Ok(self.registration_id)
    }
    async fn save_identity(
        &mut self,
        address: &signal::ProtocolAddress,
        identity: &signal::IdentityKey,
    ) -> signal::error::Result<signal::IdentityChange> {
        self.identities.insert(address.to_string(), *identity);
        Ok(signal::IdentityChange::NewOrUnchanged)
    }
    async fn is_trusted_identity(
        &self,
        _: &signal::ProtocolAddress,
        _: &signal::IdentityKey,
        _: signal::Direction,
    ) -> signal::error::Result<bool> {
        Ok(true)
    }
    async fn get_identity(
        &self,
        address: &signal::ProtocolAddress,
    ) -> signal::error::Result<Option<signal::IdentityKey>> {
        Ok(self.identities.get(&address.to_string()).copied())
    }
}

pub struct FakeWhatsApp {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    server_static: Arc<KeyPair>,
    account_key: Arc<KeyPair>,
    pub phone: u64,
}

impl FakeWhatsApp {
    pub async fn start() -> FakeWhatsApp {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shared = Arc::new(Mutex::new(Shared {
            log: FakeLog::default(),
            accounts: HashMap::new(),
            logged_out: false,
            current: None,
            pending_pair_ids: Vec::new(),
            bundle: None,
            contacts: HashMap::new(),
            sent: Vec::new(),
            unreadable: Vec::new(),
            groups: HashMap::new(),
            sender_keys: HashMap::new(),
            distributed: std::collections::HashSet::new(),
            group_sent: Vec::new(),
            receipts: Vec::new(),
            sent_messages: Vec::new(),
        }));
        let server_static = Arc::new(KeyPair::generate(&mut rand_010::rng()));
        let account_key = Arc::new(KeyPair::generate(&mut rand_010::rng()));
        let fake = FakeWhatsApp {
            addr,
            shared: shared.clone(),
            server_static: server_static.clone(),
            account_key,
            phone: 15550001111,
        };
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let shared = shared.clone();
                let server_static = server_static.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve(tcp, shared, server_static).await {
                        eprintln!("fake whatsapp: connection ended: {e:#}");
                    }
                });
            }
        });
        fake
    }

    pub fn url(&self) -> String {
        format!("ws://{}/ws/chat", self.addr)
    }

    pub fn log(&self) -> FakeLog {
        self.shared.lock().expect("lock").log.clone()
    }

    fn current(&self) -> Option<mpsc::Sender<Command>> {
        self.shared.lock().expect("lock").current.clone()
    }

    /// The phone scans `qr` (the string the client rendered): pair-success on the open connection.
    pub async fn scan_qr(&self, qr: &str) -> anyhow::Result<()> {
        let parts: Vec<&str> = qr.split(',').collect();
        anyhow::ensure!(parts.len() >= 4, "QR payload has {} fields", parts.len());
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let identity_pub = b64.decode(parts[2])?;
        let adv_secret = b64.decode(parts[3])?;
        let device_id = 1 + self.shared.lock().expect("lock").accounts.len() as u32;
        let details = wa::ADVDeviceIdentity {
            raw_id: Some(1234),
            timestamp: Some(1_750_000_000),
            key_index: Some(device_id),
            ..Default::default()
        }
        .encode_to_vec();
        let mut to_sign = vec![6u8, 0];
        to_sign.extend_from_slice(&details);
        to_sign.extend_from_slice(&identity_pub);
        let signature = self
            .account_key
            .private_key
            .calculate_signature(&to_sign, &mut rand_010::rng())?;
        let signed = wa::ADVSignedDeviceIdentity {
            details: Some(details),
            account_signature_key: Some(self.account_key.public_key.public_key_bytes().to_vec()),
            account_signature: Some(signature.to_vec()),
            ..Default::default()
        }
        .encode_to_vec();
        let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::Mac>::new_from_slice(&adv_secret)?;
        mac.update(&signed);
        let container = wa::ADVSignedDeviceIdentityHMAC {
            details: Some(signed),
            hmac: Some(mac.finalize().into_bytes().to_vec()),
            ..Default::default()
        }
        .encode_to_vec();
        let jid = format!("{}:{}@s.whatsapp.net", self.phone, device_id);
        let id = format!("pair-success-{device_id}");
        self.shared
            .lock()
            .expect("lock")
            .pending_pair_ids
            .push(id.clone());
        {
            let mut shared = self.shared.lock().expect("lock");
            shared.accounts.insert(self.phone, device_id);
            // A device linked after a logout is a new one: its logins are accepted.
            shared.logged_out = false;
        }
        let node = NodeBuilder::new("iq")
            .attrs([
                ("from", "s.whatsapp.net".to_string()),
                ("type", "set".to_string()),
                ("id", id),
                ("xmlns", "md".to_string()),
            ])
            .children([NodeBuilder::new("pair-success")
                .children([
                    NodeBuilder::new("device-identity").bytes(container).build(),
                    NodeBuilder::new("platform").attr("name", "android").build(),
                    NodeBuilder::new("device")
                        .attr("jid", jid)
                        .attr("lid", format!("99887766:{device_id}@lid"))
                        .build(),
                ])
                .build()])
            .build();
        let tx = self
            .current()
            .ok_or_else(|| anyhow::anyhow!("no open connection"))?;
        tx.send(Command::Send(node)).await?;
        Ok(())
    }

    /// Sends `node` on the open connection (encrypted, as the server does).
    pub async fn send_stanza(&self, node: Node) -> anyhow::Result<()> {
        let tx = self
            .current()
            .ok_or_else(|| anyhow::anyhow!("no open connection"))?;
        tx.send(Command::Send(node)).await?;
        Ok(())
    }

    /// Sends `bytes` as one WebSocket message, bypassing the Noise layer (malformed or oversized input).
    pub async fn send_raw(&self, bytes: Vec<u8>) -> anyhow::Result<()> {
        let tx = self
            .current()
            .ok_or_else(|| anyhow::anyhow!("no open connection"))?;
        tx.send(Command::Raw(bytes)).await?;
        Ok(())
    }

    /// Sends `plaintext` as one encrypted frame (a stanza that is not valid binary XML, say).
    pub async fn send_sealed(&self, plaintext: Vec<u8>) -> anyhow::Result<()> {
        let tx = self
            .current()
            .ok_or_else(|| anyhow::anyhow!("no open connection"))?;
        tx.send(Command::Sealed(plaintext)).await?;
        Ok(())
    }

    /// The device's uploaded pre-key bundle, once it has uploaded one.
    pub fn bundle(&self) -> Option<UploadedBundle> {
        self.shared.lock().expect("lock").bundle.clone()
    }

    /// A contact (`from_user`, a phone number, its primary device) sends `text` to the linked device:
    /// the contact's first message builds a Signal-protocol session from the device's uploaded pre-key
    /// bundle (`pkmsg` until the device has answered, `msg` after), padded as WhatsApp pads.
    pub async fn send_dm(&self, from_user: &str, id: &str, text: &str) -> anyhow::Result<()> {
        let message = wa::Message {
            conversation: Some(text.to_string()),
            ..Default::default()
        };
        self.send_dm_message(from_user, id, message).await
    }

    /// [`send_dm`](Self::send_dm) with any message (an image, a voice note…).
    pub async fn send_dm_message(
        &self,
        from_user: &str,
        id: &str,
        message: wa::Message,
    ) -> anyhow::Result<()> {
        let stanza_type = if message.conversation.is_some() {
            "text"
        } else {
            "media"
        };
        let (enc_type, ciphertext) = self.encrypt_to_device(from_user, &message).await?;
        let node = NodeBuilder::new("message")
            .attrs([
                ("from", format!("{from_user}@s.whatsapp.net")),
                ("type", stanza_type.to_string()),
                ("id", id.to_string()),
                ("t", "1750000100".to_string()),
                ("notify", "Alice".to_string()),
            ])
            .children([NodeBuilder::new("enc")
                .attrs([("v", "2".to_string()), ("type", enc_type.to_string())])
                .bytes(ciphertext)
                .build()])
            .build();
        self.send_stanza(node).await
    }

    /// `message` from `from_user`'s primary device to the linked device, padded and encrypted with the
    /// contact's pairwise session (built from the device's pre-key bundle on first use): the `<enc>` type
    /// and bytes.
    async fn encrypt_to_device(
        &self,
        from_user: &str,
        message: &wa::Message,
    ) -> anyhow::Result<(&'static str, Vec<u8>)> {
        let bundle = self
            .bundle()
            .ok_or_else(|| anyhow::anyhow!("the device uploaded no pre-keys"))?;
        let device_id = self
            .shared
            .lock()
            .expect("lock")
            .accounts
            .get(&self.phone)
            .copied()
            .unwrap_or(1);
        let address = signal::ProtocolAddress::new(
            &self.phone.to_string(),
            signal::DeviceId::from(device_id),
        );
        let known = self.shared.lock().expect("lock").contacts.remove(from_user);
        let (mut sessions, mut identity) = match known {
            // A contact keeps its session: later messages continue it.
            Some(state) => state,
            None => {
                let mut rng = rand_010::rng();
                let mut sessions = ContactSessions::default();
                let mut identity = ContactIdentity {
                    identity: signal::IdentityKeyPair::generate(&mut rng),
                    registration_id: 4321,
                    identities: HashMap::new(),
                };
                // Each new contact takes its own one-time pre-key (the device deletes one once used).
                let used = self.shared.lock().expect("lock").contacts.len();
                let (prekey_id, prekey) = bundle
                    .prekeys
                    .get(used)
                    .cloned()
                    .ok_or_else(|| anyhow::anyhow!("no one-time pre-key"))?;
                let to_key = |bytes: &[u8]| signal::PublicKey::from_djb_public_key_bytes(bytes);
                let signal_bundle = signal::PreKeyBundle::new(
                    bundle.registration_id,
                    signal::DeviceId::from(device_id),
                    Some((prekey_id.into(), to_key(&prekey)?)),
                    bundle.signed_prekey.0.into(),
                    to_key(&bundle.signed_prekey.1)?,
                    bundle.signed_prekey.2.clone(),
                    signal::IdentityKey::new(to_key(&bundle.identity)?),
                )?;
                signal::process_prekey_bundle(
                    &address,
                    &mut sessions,
                    &mut identity,
                    &signal_bundle,
                    &mut rand_010::rng(),
                    signal::UsePQRatchet::No,
                )
                .await?;
                (sessions, identity)
            }
        };
        let plain =
            whatsapp_rust::wacore::messages::MessageUtils::pad_message_v2(message.encode_to_vec());
        let ciphertext =
            signal::message_encrypt(&plain, &address, &mut sessions, &mut identity).await;
        self.shared
            .lock()
            .expect("lock")
            .contacts
            .insert(from_user.to_string(), (sessions, identity));
        let ciphertext = ciphertext?;
        let enc_type = match &ciphertext {
            signal::CiphertextMessage::PreKeySignalMessage(_) => "pkmsg",
            _ => "msg",
        };
        Ok((enc_type, ciphertext.serialize().to_vec()))
    }

    /// The account's phone writes `text` in its chat with itself ("Message yourself"): a message from
    /// the primary device (device 0 of the linked number) to its companions, wrapped as a
    /// `deviceSentMessage` to the account's own JID, as the phone fans out what it sends.
    pub async fn send_self_chat(&self, id: &str, text: &str) -> anyhow::Result<()> {
        self.send_from_phone(&self.own_jid(), id, text).await
    }

    /// The account's phone sends `text` to `recipient` (a JID): its companions get a copy
    /// (`deviceSentMessage`), from the primary device with `recipient` naming the chat.
    pub async fn send_from_phone(
        &self,
        recipient: &str,
        id: &str,
        text: &str,
    ) -> anyhow::Result<()> {
        let own = self.own_jid();
        let message = wa::Message {
            device_sent_message: buffa::MessageField::some(wa::message::DeviceSentMessage {
                destination_jid: Some(recipient.to_string()),
                message: buffa::MessageField::some(wa::Message {
                    conversation: Some(text.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (enc_type, ciphertext) = self
            .encrypt_to_device(&self.phone.to_string(), &message)
            .await?;
        let node = NodeBuilder::new("message")
            .attrs([
                ("from", own),
                ("recipient", recipient.to_string()),
                ("type", "text".to_string()),
                ("id", id.to_string()),
                ("t", "1750000100".to_string()),
                ("notify", "Owner".to_string()),
            ])
            .children([NodeBuilder::new("enc")
                .attrs([("v", "2".to_string()), ("type", enc_type.to_string())])
                .bytes(ciphertext)
                .build()])
            .build();
        self.send_stanza(node).await
    }

    /// Hosts group `group` (`<id>@g.us`) with these members (phone numbers the fake plays); the linked
    /// account is a member too. The fake answers the device's group-info query with them.
    pub fn add_group(&self, group: &str, members: &[&str]) {
        self.shared.lock().expect("lock").groups.insert(
            group.to_string(),
            members.iter().map(ToString::to_string).collect(),
        );
    }

    /// Member `from_user` sends `message` to `group`: the content as a sender-key message (`skmsg`) under
    /// the member's chain, preceded the first time by the chain's distribution message to the device
    /// over the pairwise session (`pkmsg`/`msg`), as WhatsApp delivers group messages.
    pub async fn send_group_message(
        &self,
        group: &str,
        from_user: &str,
        id: &str,
        message: wa::Message,
    ) -> anyhow::Result<()> {
        let name = signal::SenderKeyName::new(group.to_string(), format!("{from_user}.0"));
        let mut keys = self
            .shared
            .lock()
            .expect("lock")
            .sender_keys
            .remove(from_user)
            .unwrap_or_default();
        let mut rng = rand_010::rng();
        let padded =
            whatsapp_rust::wacore::messages::MessageUtils::pad_message_v2(message.encode_to_vec());
        let chain = async {
            let skdm =
                signal::create_sender_key_distribution_message(&name, &mut keys, &mut rng).await?;
            let skmsg = signal::group_encrypt(&mut keys, &name, &padded, &mut rng).await?;
            Ok::<_, anyhow::Error>((skdm, skmsg))
        }
        .await;
        self.shared
            .lock()
            .expect("lock")
            .sender_keys
            .insert(from_user.to_string(), keys);
        let (skdm, skmsg) = chain?;
        let first = self
            .shared
            .lock()
            .expect("lock")
            .distributed
            .insert((from_user.to_string(), group.to_string()));
        let mut children = Vec::new();
        if first {
            let distribution = wa::Message {
                sender_key_distribution_message: buffa::MessageField::some(
                    wa::message::SenderKeyDistributionMessage {
                        group_id: Some(group.to_string()),
                        axolotl_sender_key_distribution_message: Some(skdm.serialized().to_vec()),
                    },
                ),
                ..Default::default()
            };
            let (enc_type, ciphertext) = self.encrypt_to_device(from_user, &distribution).await?;
            children.push(
                NodeBuilder::new("enc")
                    .attrs([("v", "2".to_string()), ("type", enc_type.to_string())])
                    .bytes(ciphertext)
                    .build(),
            );
        }
        children.push(
            NodeBuilder::new("enc")
                .attrs([("v", "2".to_string()), ("type", "skmsg".to_string())])
                .bytes(skmsg.serialized().to_vec())
                .build(),
        );
        let node = NodeBuilder::new("message")
            .attrs([
                ("from", group.to_string()),
                ("participant", format!("{from_user}@s.whatsapp.net")),
                ("type", "text".to_string()),
                ("id", id.to_string()),
                ("t", "1750000100".to_string()),
                ("notify", format!("Member {from_user}")),
            ])
            .children(children)
            .build();
        self.send_stanza(node).await
    }

    /// A group text from `from_user`, with `mentioned` JIDs (`contextInfo.mentionedJid`) and the quoted
    /// message's author (`contextInfo.participant`) when given: an `extendedTextMessage` then, as
    /// WhatsApp sends mentions and replies.
    pub async fn send_group_text(
        &self,
        group: &str,
        from_user: &str,
        id: &str,
        text: &str,
        mentioned: &[String],
        quoted_author: Option<&str>,
    ) -> anyhow::Result<()> {
        let message = if mentioned.is_empty() && quoted_author.is_none() {
            wa::Message {
                conversation: Some(text.to_string()),
                ..Default::default()
            }
        } else {
            wa::Message {
                extended_text_message: buffa::MessageField::some(
                    wa::message::ExtendedTextMessage {
                        text: Some(text.to_string()),
                        context_info: buffa::MessageField::some(wa::ContextInfo {
                            mentioned_jid: mentioned.to_vec(),
                            participant: quoted_author.map(str::to_string),
                            stanza_id: quoted_author.map(|_| "3EB0QUOTED".to_string()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ),
                ..Default::default()
            }
        };
        self.send_group_message(group, from_user, id, message).await
    }

    /// Group messages the device sent, as members decrypted them: (group, member, id, text).
    pub fn group_texts(&self) -> Vec<(String, String, String, String)> {
        self.shared.lock().expect("lock").group_sent.clone()
    }

    /// The `<receipt>` stanzas the device sent.
    pub fn receipts(&self) -> Vec<Receipt> {
        self.shared.lock().expect("lock").receipts.clone()
    }

    /// The linked account's JID on the phone-number server (`<phone>@s.whatsapp.net`).
    pub fn own_jid(&self) -> String {
        format!("{}@s.whatsapp.net", self.phone)
    }

    /// Texts the device sent, as the addressed contacts read them: (to, message id, text).
    pub fn sent_texts(&self) -> Vec<(String, String, String)> {
        self.shared.lock().expect("lock").sent.clone()
    }

    /// Messages the device sent, whole, as the addressed contacts decrypted them: (to, id, message).
    pub fn sent_messages(&self) -> Vec<(String, String, wa::Message)> {
        self.shared.lock().expect("lock").sent_messages.clone()
    }

    /// Outgoing `<message>` stanzas the fake could not read, with why.
    pub fn unreadable(&self) -> Vec<String> {
        self.shared.lock().expect("lock").unreadable.clone()
    }

    /// A server ping (`<iq xmlns="urn:xmpp:ping" type="get">`) with `id`; the client answers with a result.
    pub fn ping(id: &str) -> Node {
        NodeBuilder::new("iq")
            .attrs([
                ("from", "s.whatsapp.net".to_string()),
                ("type", "get".to_string()),
                ("id", id.to_string()),
                ("xmlns", "urn:xmpp:ping".to_string()),
            ])
            .build()
    }

    /// Drops the open connection without a goodbye (network loss).
    pub async fn drop_connection(&self) {
        if let Some(tx) = self.current() {
            let _ = tx.send(Command::Close).await;
        }
    }

    /// The user removes the linked device from the phone: a stream error 401 on the open connection and
    /// a `<failure reason="401">` on any later login.
    pub async fn log_out(&self) {
        self.shared.lock().expect("lock").logged_out = true;
        if let Some(tx) = self.current() {
            let node = NodeBuilder::new("stream:error").attr("code", "401").build();
            let _ = tx.send(Command::Send(node)).await;
        }
    }

    pub fn server_static_pub(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(self.server_static.public_key.public_key_bytes());
        out
    }
}

struct Conn {
    frames: FrameDecoder,
    header_seen: bool,
}

async fn next_frame<S>(ws: &mut S, conn: &mut Conn) -> anyhow::Result<Option<Vec<u8>>>
where
    S: futures_util::Stream<Item = Result<WsMessage, tokio_tungstenite::tungstenite::Error>>
        + Unpin,
{
    loop {
        if let Some(frame) = conn.frames.decode_frame() {
            return Ok(Some(frame.to_vec()));
        }
        let Some(msg) = ws.next().await else {
            return Ok(None);
        };
        match msg? {
            WsMessage::Binary(data) => {
                let mut data: &[u8] = &data;
                if !conn.header_seen {
                    anyhow::ensure!(
                        data.starts_with(&WA_CONN_HEADER),
                        "first bytes are not the WA header"
                    );
                    data = &data[WA_CONN_HEADER.len()..];
                    conn.header_seen = true;
                }
                conn.frames.feed(data);
            }
            WsMessage::Close(_) => return Ok(None),
            _ => {}
        }
    }
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = Vec::with_capacity(3 + len);
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8]);
    out.extend_from_slice(payload);
    out
}

async fn serve(
    tcp: tokio::net::TcpStream,
    shared: Arc<Mutex<Shared>>,
    server_static: Arc<KeyPair>,
) -> anyhow::Result<()> {
    let ws = tokio_tungstenite::accept_async(tcp).await?;
    let (mut sink, mut stream) = ws.split();
    shared.lock().expect("lock").log.connections += 1;
    let mut conn = Conn {
        frames: FrameDecoder::new(),
        header_seen: false,
    };

    // ── Handshake.
    let hello = next_frame(&mut stream, &mut conn)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no hello"))?;
    let hello = wa::HandshakeMessage::decode_from_slice(&hello)?;
    let ch = hello
        .client_hello
        .into_option()
        .ok_or_else(|| anyhow::anyhow!("no client hello"))?;
    let client_eph: [u8; 32] = ch
        .ephemeral
        .clone()
        .unwrap_or_default()
        .try_into()
        .map_err(|_| anyhow::anyhow!("eph"))?;
    let server_pub = server_static.public_key.public_key_bytes().to_vec();
    let server_priv = server_static.private_key.serialize();
    let cert = cert_chain(
        &server_pub
            .clone()
            .try_into()
            .map_err(|_| anyhow::anyhow!("pub"))?,
    );
    let eph = KeyPair::generate(&mut rand_010::rng());
    let eph_pub = eph.public_key.public_key_bytes().to_vec();
    let eph_priv = eph.private_key.serialize();
    let (payload, noise) =
        if let (Some(enc_static), Some(enc_payload)) = (ch.r#static.clone(), ch.payload.clone()) {
            // IK: the client knows our static key from the last XX.
            let mut noise = NoiseHandshake::new(NOISE_PATTERN_IK, &WA_CONN_HEADER)?;
            noise.authenticate(&server_pub);
            noise.authenticate(&client_eph);
            noise.mix_shared_secret(server_priv, &client_eph)?;
            let client_static = noise.decrypt(&enc_static)?;
            noise.mix_shared_secret(server_priv, &client_static)?;
            let payload = noise.decrypt(&enc_payload)?;
            noise.authenticate(&eph_pub);
            noise.mix_shared_secret(eph_priv, &client_eph)?;
            noise.mix_shared_secret(eph_priv, &client_static)?;
            let enc_cert = noise.encrypt(&cert)?;
            let sh = wa::HandshakeMessage {
                server_hello: buffa::MessageField::some(wa::handshake_message::ServerHello {
                    ephemeral: Some(eph_pub.clone()),
                    r#static: None,
                    payload: Some(enc_cert),
                    ..Default::default()
                }),
                ..Default::default()
            };
            sink.send(WsMessage::Binary(framed(&sh.encode_to_vec()).into()))
                .await?;
            (payload, noise)
        } else {
            let mut noise = NoiseHandshake::new(NOISE_PATTERN_XX, &WA_CONN_HEADER)?;
            noise.authenticate(&client_eph);
            noise.authenticate(&eph_pub);
            noise.mix_shared_secret(eph_priv, &client_eph)?;
            let enc_static = noise.encrypt(&server_pub)?;
            noise.mix_shared_secret(server_priv, &client_eph)?;
            let enc_cert = noise.encrypt(&cert)?;
            let sh = wa::HandshakeMessage {
                server_hello: buffa::MessageField::some(wa::handshake_message::ServerHello {
                    ephemeral: Some(eph_pub.clone()),
                    r#static: Some(enc_static),
                    payload: Some(enc_cert),
                    ..Default::default()
                }),
                ..Default::default()
            };
            sink.send(WsMessage::Binary(framed(&sh.encode_to_vec()).into()))
                .await?;
            let finish = next_frame(&mut stream, &mut conn)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no finish"))?;
            let finish = wa::HandshakeMessage::decode_from_slice(&finish)?;
            let cf = finish
                .client_finish
                .into_option()
                .ok_or_else(|| anyhow::anyhow!("no client finish"))?;
            let client_static = noise.decrypt(&cf.r#static.unwrap_or_default())?;
            noise.mix_shared_secret(eph_priv, &client_static)?;
            let payload = noise.decrypt(&cf.payload.unwrap_or_default())?;
            (payload, noise)
        };
    let (read, write) = noise.finish()?;
    let payload = wa::ClientPayload::decode_from_slice(&payload)?;

    let device_address = payload
        .username
        .map(|user| (user.to_string(), payload.device.unwrap_or(0)));
    let (tx, mut rx) = mpsc::channel::<Command>(16);
    shared.lock().expect("lock").current = Some(tx.clone());
    let mut out = Outbound { write, counter: 0 };
    let mut read_counter = 0u32;

    if payload.device_pairing_data.is_set() {
        shared.lock().expect("lock").log.registrations += 1;
        let refs = (0..6).map(|i| {
            NodeBuilder::new("ref")
                .bytes(format!("2@fake-ref-{i}").into_bytes())
                .build()
        });
        let node = NodeBuilder::new("iq")
            .attrs([
                ("from", "s.whatsapp.net".to_string()),
                ("type", "set".to_string()),
                ("id", "pair-device-1".to_string()),
                ("xmlns", "md".to_string()),
            ])
            .children([NodeBuilder::new("pair-device").children(refs).build()])
            .build();
        out.send(&mut sink, &node).await?;
    } else {
        let user = payload.username.unwrap_or(0);
        let known = {
            let s = shared.lock().expect("lock");
            !s.logged_out && s.accounts.contains_key(&user)
        };
        if !known {
            let node = NodeBuilder::new("failure")
                .attr("reason", "401")
                .attr("location", "fake")
                .build();
            out.send(&mut sink, &node).await?;
            let _ = sink.close().await;
            return Ok(());
        }
        shared.lock().expect("lock").log.logins += 1;
        let success = NodeBuilder::new("success")
            .attrs([
                ("t", "1750000000".to_string()),
                ("props", "1".to_string()),
                ("lid", "99887766@lid".to_string()),
            ])
            .build();
        out.send(&mut sink, &success).await?;
        let offline = NodeBuilder::new("ib")
            .children([NodeBuilder::new("offline").attr("count", "0").build()])
            .build();
        out.send(&mut sink, &offline).await?;
    }

    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Command::Send(node)) => {
                    let close = node.tag == "stream:error";
                    out.send(&mut sink, &node).await?;
                    if close { let _ = sink.close().await; return Ok(()); }
                }
                Some(Command::Raw(bytes)) => sink.send(WsMessage::Binary(bytes.into())).await?,
                Some(Command::Sealed(plain)) => out.send_plain(&mut sink, &plain).await?,
                Some(Command::Close) | None => return Ok(()),
            },
            frame = next_frame(&mut stream, &mut conn) => {
                let Some(frame) = frame? else { return Ok(()) };
                let plain = decrypt(&read, read_counter, &frame)?;
                read_counter += 1;
                anyhow::ensure!(!plain.is_empty(), "empty stanza");
                anyhow::ensure!(plain[0] & 2 == 0, "compressed stanzas not expected from a client");
                let node = marshal::unmarshal_ref(&plain[1..])?.to_owned();
                shared.lock().expect("lock").log.stanzas_in.push(describe(&node));
                if node.tag == "receipt" {
                    let attr = |k: &str| node.attrs.get(k).map(|v| v.as_str().to_string());
                    shared.lock().expect("lock").receipts.push(Receipt {
                        kind: attr("type").unwrap_or_default(),
                        to: attr("to").unwrap_or_default(),
                        id: attr("id").unwrap_or_default(),
                        participant: attr("participant"),
                    });
                    let ack = NodeBuilder::new("ack")
                        .attrs([("class", "receipt".to_string()), ("id", attr("id").unwrap_or_default())])
                        .build();
                    out.send(&mut sink, &ack).await?;
                    continue;
                }
                if node.tag == "message" && node.attrs.get("to").is_some_and(|t| t.as_str().ends_with("@g.us")) {
                    let id = node.attrs.get("id").map(|v| v.as_str().to_string()).unwrap_or_default();
                    let to = node.attrs.get("to").map(|v| v.as_str().to_string()).unwrap_or_default();
                    match read_outgoing_group(&node, &shared, &device_address).await {
                        Ok(read) => shared.lock().expect("lock").group_sent.extend(read),
                        Err(e) => shared.lock().expect("lock").unreadable.push(format!("{id}: {e:#}")),
                    }
                    let ack = NodeBuilder::new("ack")
                        .attrs([("class", "message".to_string()), ("id", id), ("from", to), ("t", "1750000200".to_string())])
                        .build();
                    out.send(&mut sink, &ack).await?;
                    continue;
                }
                if node.tag == "message" {
                    let outcome = read_outgoing(&node, &shared, &device_address).await;
                    let id = node.attrs.get("id").map(|v| v.as_str().to_string()).unwrap_or_default();
                    match outcome {
                        Ok(Some(sent)) => shared.lock().expect("lock").sent.push(sent),
                        Ok(None) => {}
                        Err(e) => shared.lock().expect("lock").unreadable.push(format!("{id}: {e:#}")),
                    }
                    let to = node.attrs.get("to").map(|v| v.as_str().to_string()).unwrap_or_default();
                    let ack = NodeBuilder::new("ack")
                        .attrs([("class", "message".to_string()), ("id", id), ("from", to), ("t", "1750000200".to_string())])
                        .build();
                    out.send(&mut sink, &ack).await?;
                    continue;
                }
                if let Some(reply) = answer(&node, &shared) {
                    for n in reply { out.send(&mut sink, &n).await?; }
                }
            }
        }
    }
}

fn describe(node: &Node) -> String {
    let mut s = node.tag.to_string();
    for key in ["type", "xmlns", "id"] {
        if let Some(v) = node.attrs.get(key) {
            s.push_str(&format!(" {key}={}", v.as_str()));
        }
    }
    if let Some(NodeContent::Nodes(children)) = &node.content {
        for c in children {
            s.push_str(&format!(" <{}>", c.tag));
        }
    }
    s
}

/// The server's answers to client stanzas: results for IQs (empty unless the client needs content),
/// the restart after a completed pairing.
fn answer(node: &Node, shared: &Arc<Mutex<Shared>>) -> Option<Vec<Node>> {
    if node.tag != "iq" {
        return None;
    }
    let id = node.attrs.get("id")?.as_str().to_string();
    let kind = node
        .attrs
        .get("type")
        .map(|v| v.as_str().to_string())
        .unwrap_or_default();
    if kind == "set" && node.get_optional_child("registration").is_some() {
        shared.lock().expect("lock").bundle = parse_bundle(node);
    }
    if kind == "result" {
        let mut s = shared.lock().expect("lock");
        s.log.results.push(id.clone());
        if let Some(pos) = s.pending_pair_ids.iter().position(|p| *p == id) {
            s.pending_pair_ids.remove(pos);
            s.log.paired.push(id);
            // Pairing done: the server restarts the stream (515) so the client logs in.
            return Some(vec![NodeBuilder::new("stream:error")
                .attr("code", "515")
                .build()]);
        }
        return None;
    }
    let xmlns = node
        .attrs
        .get("xmlns")
        .map(|v| v.as_str().to_string())
        .unwrap_or_default();
    let mut result = NodeBuilder::new("iq").attrs([
        ("from", "s.whatsapp.net".to_string()),
        ("type", "result".to_string()),
        ("id", id),
    ]);
    if xmlns == "usync" {
        // Device lists: a contact the fake plays has its primary device only; anyone else none.
        let contacts: Vec<String> = shared
            .lock()
            .expect("lock")
            .contacts
            .keys()
            .cloned()
            .collect();
        let users: Vec<Node> = node
            .get_optional_child("usync")
            .and_then(|u| u.get_optional_child("list"))
            .map(|list| {
                list.get_children_by_tag("user")
                    .filter_map(|u| u.attrs.get("jid").map(|v| v.as_str().to_string()))
                    .map(|jid| {
                        let user = jid.split(['@', ':']).next().unwrap_or_default();
                        let devices: Vec<Node> = if contacts.iter().any(|c| c == user) {
                            vec![NodeBuilder::new("device").attr("id", "0").build()]
                        } else {
                            Vec::new()
                        };
                        NodeBuilder::new("user")
                            .attr("jid", jid)
                            .children([NodeBuilder::new("devices")
                                .children([NodeBuilder::new("device-list")
                                    .children(devices)
                                    .build()])
                                .build()])
                            .build()
                    })
                    .collect()
            })
            .unwrap_or_default();
        result = result.children([NodeBuilder::new("usync")
            .children([NodeBuilder::new("list").children(users).build()])
            .build()]);
    }
    if xmlns == "w:g2" && node.get_optional_child("query").is_some() {
        // Group info: the hosted group's members (phone-number addressing) and the linked account.
        let to = node
            .attrs
            .get("to")
            .map(|v| v.as_str().to_string())
            .unwrap_or_default();
        let (members, own) = {
            let s = shared.lock().expect("lock");
            let own = s.accounts.keys().next().copied();
            (s.groups.get(&to).cloned(), own)
        };
        let Some(members) = members else {
            let error = NodeBuilder::new("iq")
                .attrs([
                    ("from", to.clone()),
                    ("type", "error".to_string()),
                    ("id", node.attrs.get("id")?.as_str().to_string()),
                ])
                .children([NodeBuilder::new("error")
                    .attrs([
                        ("code", "404".to_string()),
                        ("text", "item-not-found".to_string()),
                    ])
                    .build()]);
            return Some(vec![error.build()]);
        };
        let mut participants: Vec<Node> = members
            .iter()
            .map(|m| {
                NodeBuilder::new("participant")
                    .attr("jid", format!("{m}@s.whatsapp.net"))
                    .build()
            })
            .collect();
        if let Some(own) = own {
            participants.push(
                NodeBuilder::new("participant")
                    .attr("jid", format!("{own}@s.whatsapp.net"))
                    .build(),
            );
        }
        let id = to.split('@').next().unwrap_or_default().to_string();
        result = result.attr("from", to).children([NodeBuilder::new("group")
            .attrs([
                ("id", id),
                ("subject", "Fake group".to_string()),
                ("addressing_mode", "pn".to_string()),
                ("creation", "1750000000".to_string()),
            ])
            .children(participants)
            .build()]);
    }
    if xmlns == "w:m" && node.get_optional_child("media_conn").is_some() {
        // The media hosts and the upload auth token (`fake_whatsapp_media.rs` serves them).
        result = result.children([NodeBuilder::new("media_conn")
            .attrs([
                ("auth", media::MEDIA_AUTH.to_string()),
                ("ttl", "300".to_string()),
                ("auth_ttl", "300".to_string()),
                ("max_buckets", "12".to_string()),
            ])
            .children([NodeBuilder::new("host")
                .attr("hostname", media::MEDIA_HOST)
                .build()])
            .build()]);
    }
    if xmlns == "w:sync:app:state" {
        // App-state sync: every requested collection, empty (no patches, nothing more).
        let names: Vec<String> = node
            .get_optional_child("sync")
            .map(|sync| {
                sync.get_children_by_tag("collection")
                    .filter_map(|c| c.attrs.get("name").map(|v| v.as_str().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let collections = names
            .into_iter()
            .map(|name| NodeBuilder::new("collection").attr("name", name).build());
        result = result.children([NodeBuilder::new("sync").children(collections).build()]);
    }
    Some(vec![result.build()])
}

struct Outbound {
    write: NoiseCipher,
    counter: u32,
}

impl Outbound {
    async fn send<S>(&mut self, sink: &mut S, node: &Node) -> anyhow::Result<()>
    where
        S: futures_util::Sink<WsMessage, Error = tokio_tungstenite::tungstenite::Error> + Unpin,
    {
        let plain = marshal::marshal(node)?;
        self.send_plain(sink, &plain).await?;
        if node.tag == "stream:error" {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    async fn send_plain<S>(&mut self, sink: &mut S, plain: &[u8]) -> anyhow::Result<()>
    where
        S: futures_util::Sink<WsMessage, Error = tokio_tungstenite::tungstenite::Error> + Unpin,
    {
        let cipher = self.write.encrypt_with_counter(self.counter, plain)?;
        self.counter += 1;
        sink.send(WsMessage::Binary(framed(&cipher).into())).await?;
        Ok(())
    }
}

fn decrypt(cipher: &NoiseCipher, counter: u32, frame: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut buf = frame.to_vec();
    cipher.decrypt_in_place_with_counter(counter, &mut buf)?;
    Ok(buf)
}

/// Reads a `<message>` the device sent to a contact the fake plays: the `<enc>` for the contact's
/// primary device, decrypted with the contact's session and unpadded. `None` for other recipients.
async fn read_outgoing(
    node: &Node,
    shared: &Arc<Mutex<Shared>>,
    device_address: &Option<(String, u32)>,
) -> anyhow::Result<Option<(String, String, String)>> {
    let to = node
        .attrs
        .get("to")
        .map(|v| v.as_str().to_string())
        .unwrap_or_default();
    let id = node
        .attrs
        .get("id")
        .map(|v| v.as_str().to_string())
        .unwrap_or_default();
    let user = to.split(['@', ':']).next().unwrap_or_default().to_string();
    let enc = match node.get_optional_child("participants") {
        Some(participants) => participants
            .get_children_by_tag("to")
            .find(|t| {
                t.attrs
                    .get("jid")
                    .is_some_and(|j| j.as_str().starts_with(&format!("{user}@")))
            })
            .and_then(|t| t.get_optional_child("enc")),
        None => node.get_optional_child("enc"),
    };
    let Some(enc) = enc else {
        let addressed: Vec<String> = node
            .get_optional_child("participants")
            .map(|p| {
                p.get_children_by_tag("to")
                    .filter_map(|t| t.attrs.get("jid").map(|v| v.as_str().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        anyhow::bail!("no <enc> for {user} (to {to}; participants {addressed:?})");
    };
    let Some(NodeContent::Bytes(ciphertext)) = &enc.content else {
        anyhow::bail!("enc without bytes");
    };
    let kind = enc
        .attrs
        .get("type")
        .map(|v| v.as_str().to_string())
        .unwrap_or_default();
    let (device_user, device_id) = device_address
        .clone()
        .ok_or_else(|| anyhow::anyhow!("message before login"))?;
    let contact = shared.lock().expect("lock").contacts.remove(&user);
    let Some((mut sessions, mut identity)) = contact else {
        anyhow::bail!("to {to}: not a contact the fake plays");
    };
    let address = signal::ProtocolAddress::new(&device_user, signal::DeviceId::from(device_id));
    let result = match kind.as_str() {
        "msg" => {
            let message = signal::SignalMessage::try_from(ciphertext.as_slice())?;
            let mut rng = rand_010::make_rng::<rand_010::rngs::StdRng>();
            signal::message_decrypt_signal(
                &message,
                &address,
                &mut sessions,
                &mut identity,
                &mut rng,
            )
            .await
            .map_err(anyhow::Error::from)
        }
        other => Err(anyhow::anyhow!(
            "enc type {other} (the contact has a session: expected msg)"
        )),
    };
    shared
        .lock()
        .expect("lock")
        .contacts
        .insert(user.clone(), (sessions, identity));
    let plain = result?.plaintext;
    let pad = usize::from(
        *plain
            .last()
            .ok_or_else(|| anyhow::anyhow!("empty plaintext"))?,
    );
    anyhow::ensure!(pad >= 1 && pad <= plain.len(), "bad padding");
    let message = wa::Message::decode_from_slice(&plain[..plain.len() - pad])?;
    shared
        .lock()
        .expect("lock")
        .sent_messages
        .push((to.clone(), id.clone(), message.clone()));
    // A message to the account's own devices comes wrapped as sent from this device.
    let text = message.conversation.clone().or_else(|| {
        message
            .device_sent_message
            .as_option()
            .and_then(|d| d.message.as_option())
            .and_then(|m| m.conversation.clone())
    });
    Ok(Some((to, id, text.unwrap_or_default())))
}

/// Decrypts `ciphertext` (`msg` or `pkmsg`) from the device with `member`'s pairwise session and
/// unpads it into a message.
async fn decrypt_from_device(
    shared: &Arc<Mutex<Shared>>,
    device: &signal::ProtocolAddress,
    member: &str,
    kind: &str,
    ciphertext: &[u8],
) -> anyhow::Result<wa::Message> {
    let contact = shared.lock().expect("lock").contacts.remove(member);
    let Some((mut sessions, mut identity)) = contact else {
        anyhow::bail!("{member}: not a contact the fake plays");
    };
    let result = match kind {
        "msg" => {
            let message = signal::SignalMessage::try_from(ciphertext)?;
            let mut rng = rand_010::make_rng::<rand_010::rngs::StdRng>();
            signal::message_decrypt_signal(&message, device, &mut sessions, &mut identity, &mut rng)
                .await
                .map_err(anyhow::Error::from)
        }
        other => Err(anyhow::anyhow!(
            "enc type {other} (the member has a session: expected msg)"
        )),
    };
    shared
        .lock()
        .expect("lock")
        .contacts
        .insert(member.to_string(), (sessions, identity));
    unpad(&result?.plaintext)
}

/// WhatsApp's padding removed, the message decoded.
fn unpad(plain: &[u8]) -> anyhow::Result<wa::Message> {
    let pad = usize::from(
        *plain
            .last()
            .ok_or_else(|| anyhow::anyhow!("empty plaintext"))?,
    );
    anyhow::ensure!(pad >= 1 && pad <= plain.len(), "bad padding");
    Ok(wa::Message::decode_from_slice(&plain[..plain.len() - pad])?)
}

/// Reads a group `<message>` the device sent as each member the fake plays would: the device's
/// sender-key distribution from the member's `<to>` entry (when there is one) kept in the member's
/// sender-key store, then the `skmsg` decrypted with it. One (group, member, id, text) per member who
/// could read it (the others are listed as unreadable).
async fn read_outgoing_group(
    node: &Node,
    shared: &Arc<Mutex<Shared>>,
    device_address: &Option<(String, u32)>,
) -> anyhow::Result<Vec<(String, String, String, String)>> {
    let attr = |k: &str| {
        node.attrs
            .get(k)
            .map(|v| v.as_str().to_string())
            .unwrap_or_default()
    };
    let (group, id) = (attr("to"), attr("id"));
    let (device_user, device_id) = device_address
        .clone()
        .ok_or_else(|| anyhow::anyhow!("message before login"))?;
    let device = signal::ProtocolAddress::new(&device_user, signal::DeviceId::from(device_id));
    let members = shared
        .lock()
        .expect("lock")
        .groups
        .get(&group)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("{group} is not a group the fake hosts"))?;
    let skmsg = node
        .get_children_by_tag("enc")
        .find(|e| e.attrs.get("type").is_some_and(|t| t.as_str() == "skmsg"))
        .and_then(|e| match &e.content {
            Some(NodeContent::Bytes(bytes)) => Some(bytes.clone()),
            _ => None,
        })
        .ok_or_else(|| anyhow::anyhow!("no skmsg <enc>"))?;
    let name = signal::SenderKeyName::new(group.clone(), format!("{device_user}.{device_id}"));
    let mut read = Vec::new();
    for member in members {
        let entry = node.get_optional_child("participants").and_then(|p| {
            p.get_children_by_tag("to").find(|t| {
                t.attrs
                    .get("jid")
                    .is_some_and(|j| j.as_str().split(['@', ':']).next() == Some(member.as_str()))
            })
        });
        let mut keys = shared
            .lock()
            .expect("lock")
            .sender_keys
            .remove(&member)
            .unwrap_or_default();
        let outcome = async {
            if let Some(enc) = entry.and_then(|t| t.get_optional_child("enc")) {
                let Some(NodeContent::Bytes(ciphertext)) = &enc.content else {
                    anyhow::bail!("enc without bytes");
                };
                let kind = enc
                    .attrs
                    .get("type")
                    .map(|v| v.as_str().to_string())
                    .unwrap_or_default();
                let message =
                    decrypt_from_device(shared, &device, &member, &kind, ciphertext).await?;
                let distribution = message
                    .sender_key_distribution_message
                    .as_option()
                    .and_then(|d| d.axolotl_sender_key_distribution_message.clone())
                    .ok_or_else(|| anyhow::anyhow!("no sender-key distribution for {member}"))?;
                let skdm = signal::SenderKeyDistributionMessage::try_from(distribution.as_slice())?;
                signal::process_sender_key_distribution_message(&name, &skdm, &mut keys).await?;
            }
            let plain = signal::group_decrypt(&skmsg, &mut keys, &name).await?;
            let message = unpad(&plain)?;
            Ok(message
                .conversation
                .clone()
                .or_else(|| {
                    message
                        .extended_text_message
                        .as_option()
                        .and_then(|t| t.text.clone())
                })
                .unwrap_or_default())
        }
        .await;
        shared
            .lock()
            .expect("lock")
            .sender_keys
            .insert(member.clone(), keys);
        match outcome {
            Ok(text) => read.push((group.clone(), member.clone(), id.clone(), text)),
            Err(e) => shared
                .lock()
                .expect("lock")
                .unreadable
                .push(format!("{id} for {member}: {e:#}")),
        }
    }
    Ok(read)
}
