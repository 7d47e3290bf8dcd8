package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// SignatureHeader carries "sha256=<hex of HMAC-SHA256 of the body>" under
// the subscription's spec.signingKey, as GitHub's webhooks sign theirs.
const SignatureHeader = "X-Muster-Signature"

// ContentType is CloudEvents' structured JSON mode.
const ContentType = "application/cloudevents+json; charset=utf-8"

// Type is the CloudEvents type of a transition: "io.muster." and the
// transition's name in lower case (io.muster.machinefailed).
func Type(e api.NotificationEvent) string { return "io.muster." + strings.ToLower(string(e)) }

// Event is one transition to tell a subscription of.
type Event struct {
	// Kind is what it happened to (api.NotificationEvent).
	Kind api.NotificationEvent
	// ID names the transition, the same for every subscription and every
	// retry (the object's UID and resource version), so that a receiver
	// that got it twice knows.
	ID string
	// Subject is the object: "machines/NAME".
	Subject string
	// Time is when this server saw the transition.
	Time time.Time
	// Data is what the receiver is told of the object: names, phases,
	// reasons; never a secret.
	Data map[string]string
}

// cloudEvent is a CloudEvent 1.0 in structured JSON.
type cloudEvent struct {
	SpecVersion     string            `json:"specversion"`
	ID              string            `json:"id"`
	Source          string            `json:"source"`
	Type            string            `json:"type"`
	Subject         string            `json:"subject"`
	Time            string            `json:"time"`
	DataContentType string            `json:"datacontenttype"`
	Sequence        string            `json:"sequence"`
	Data            map[string]string `json:"data"`
}

// encode is e as the body sent to a subscription, with the sequence the
// subscription numbers its events by (the CloudEvents sequence extension,
// a decimal string: later events have larger numbers), and its signature.
func encode(e Event, source string, seq uint64, key []byte) (body []byte, signature string, err error) {
	body, err = json.Marshal(cloudEvent{
		SpecVersion: "1.0", ID: e.ID, Source: source, Type: Type(e.Kind), Subject: e.Subject,
		Time: e.Time.UTC().Format(time.RFC3339Nano), DataContentType: "application/json",
		Sequence: strconv.FormatUint(seq, 10), Data: e.Data,
	})
	if err != nil {
		return nil, "", err
	}
	return body, Sign(body, key), nil
}

// Sign is the signature header's value for body under key.
func Sign(body, key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
