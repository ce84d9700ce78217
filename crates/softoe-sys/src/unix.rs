//! Unix-domain sockets (SOCK_SEQPACKET, SCM_RIGHTS descriptor passing, peer credentials, abstract names): the host interface's attach protocol belongs here; nothing is wrapped yet.
