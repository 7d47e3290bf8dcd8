package console

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
)

// MintVia asks a running server, with an administrator's credentials, to
// mint a console token (POST /console/tokens).
func MintVia(ctx context.Context, c rest.Interface, user string, groups []string, ttl time.Duration) (MintResponse, error) {
	body, _ := json.Marshal(mintRequest{User: user, Groups: groups, TTL: ttl.String()})
	raw, err := c.Post().AbsPath(TokensPath).SetHeader("Content-Type", "application/json").Body(body).DoRaw(ctx)
	if err != nil {
		var msg struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(raw, &msg) == nil && msg.Message != "" {
			return MintResponse{}, fmt.Errorf("minting a console token: %s", msg.Message)
		}
		return MintResponse{}, fmt.Errorf("minting a console token: %w (is the server running, and is this the admin kubeconfig?)", err)
	}
	var out MintResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return MintResponse{}, fmt.Errorf("the server's answer to a console token request is not JSON: %w", err)
	}
	return out, nil
}
