package edge

import (
	"errors"
	"strings"
)

// Handshake failures the operator must hear of. A handshake for a name the
// edge would serve fails when the certificate storage takes no write
// (certmagic's check before an order), the ask endpoint does not answer,
// the CA does not issue, or orders_per_hour (or a registered domain's
// share of it) is reached: each is logged at WARN with its reason, at most
// once every 10 s per reason with the count held back, since a name
// without a certificate fails every handshake until it has one. A name
// refused (not in acme.domains, denied by the ask endpoint, a client over
// handshakes_per_client or over its share of the orders, a client in a
// penalty box, a name that does not qualify) is the client's doing:
// counted by linkgate_tls_on_demand_decisions_total, never logged. A
// storage not connected yet is logged where it is decided (gate.decide).

// Reasons of a failed handshake, in the log.
const (
	reasonStorage = "storage"
	reasonAsk     = "ask"
	reasonCA      = "ca"
	reasonCap     = "cap"
)

// handshakeFailed logs err, the failure of a handshake for name, when it
// is one the operator must act on.
func (e *Edge) handshakeFailed(name string, err error) {
	reason := e.handshakeReason(name, err)
	if reason == "" {
		return
	}
	if reason == reasonStorage {
		e.health.failed(err)
	}
	if n, ok := e.gate.logs.Allow("handshake "+reason, e.gate.now()); ok {
		e.log.Warn("TLS handshake failed for an allowed name", "name", name, "reason", reason, "err", err, "suppressed", n)
	}
}

// handshakeReason is why a handshake for name failed with err, "" when
// it is not the operator's to hear of.
func (e *Edge) handshakeReason(name string, err error) string {
	switch {
	case errors.Is(err, errAskFailed):
		return reasonAsk // whether the name is allowed is unknown: the endpoint must answer
	case errors.Is(err, errUnavailable), !e.gate.allowed(name):
		return ""
	case isStorageCheck(err):
		return reasonStorage
	case is(err, errClientOrderCap):
		return "" // one client's share of the hour's orders: the client's doing
	case is(err, errOrderCap), is(err, errDomainOrderCap):
		return reasonCap
	}
	return reasonCA
}

// is reports whether err is target, or says so: certmagic may return an
// order's error as text.
func is(err, target error) bool {
	return errors.Is(err, target) || strings.Contains(err.Error(), target.Error())
}
