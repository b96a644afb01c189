package durable

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notUTF8 is a result whose JSON holds a byte that is not UTF-8: 0xe9,
// "é" in Latin-1. encoding/json keeps a json.RawMessage's bytes as they
// are, and so decodes them back, but PostgreSQL refuses them in any text,
// jsonb included.
var notUTF8 = json.RawMessage("{\"name\":\"caf\xe9\"}")

// TestH110NotUTF8DoesNotWedgeTheJobOnPostgres: PostgreSQL refused River's
// update that records the attempt, whose checkpoint held notUTF8, and the
// job stayed running until River's rescuer (and the client's Stop waited
// for it), as with \u0000 (TestNulResultDoesNotWedgeTheJobOnPostgres).
func TestH110NotUTF8DoesNotWedgeTheJobOnPostgres(t *testing.T) {
	requireFailsOnPostgres(t, resultThenFailure(notUTF8))
}

// TestH110NotUTF8FailsTheNode: on SQLite, which stores such bytes, the
// node fails all the same, with ErrUnstorableJSON, and Resume refuses
// such a value, so that a job behaves the same on both databases.
func TestH110NotUTF8FailsTheNode(t *testing.T) {
	_, err := checkpointJSON(notUTF8)
	require.ErrorIs(t, err, ErrUnstorableJSON)

	var a, s atomic.Int32
	var approved atomic.Bool
	var got atomic.Int64
	client, id, _ := parkApproval(t, &a, &s, &approved, &got)
	_, err = Resume(context.Background(), client, id, map[string]any{"s": json.RawMessage("\"\xff\"")})
	require.ErrorIs(t, err, ErrUnstorableJSON)
	assert.Contains(t, err.Error(), `node "s"`)
	_, err = Resume(context.Background(), client, id, map[string]any{"s": 7})
	assert.NoError(t, err, "still parked")
}
