package hub

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// poolCatalog is this replica's copy of the store's pools (store.Pool: workers alike in binding and
// capabilities), so that choosing where a request may run reads no worker record: the request is matched
// against the few pools, then takes an idle worker of one. The copy is read again when a registration
// created or joined a pool (store.TopicPools, from any replica) and at least every poolCatalogAge.
type poolCatalog struct {
	mu    sync.Mutex
	pools []store.Pool
	at    time.Time // zero: stale
	gen   int       // counts invalidations
}

// poolCatalogAge bounds how old the copy may be (a pool notification lost by the feed).
const poolCatalogAge = 5 * time.Second

// invalidate marks the copy stale.
func (c *poolCatalog) invalidate() {
	c.mu.Lock()
	c.at = time.Time{}
	c.gen++
	c.mu.Unlock()
}

// get returns the pools, reading them when the copy is stale.
func (c *poolCatalog) get(ctx context.Context, st Store) ([]store.Pool, error) {
	c.mu.Lock()
	if !c.at.IsZero() && time.Since(c.at) < poolCatalogAge {
		defer c.mu.Unlock()
		return c.pools, nil
	}
	gen := c.gen
	c.mu.Unlock()
	start := time.Now()
	pools, err := st.Pools(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pools = pools
	if c.gen == gen { // an invalidation while reading leaves the copy stale
		c.at = start
	}
	return pools, nil
}

// eligiblePools lists the pools whose workers may take d (§13.3: binding, runtime, workspace operation),
// only those advertising d's model when some do.
func (h *Hub) eligiblePools(pools []store.Pool, d *dispatchReq) []string {
	var out, withModel []string
	label := "model:" + d.model
	for _, p := range pools {
		caps := &p.Capabilities
		if !h.admits(p.Binding, d.caller) || (d.runtimeLabel != "" && !caps.HasRuntime(d.runtimeLabel)) ||
			(d.accept != nil && !d.accept(caps)) {
			continue
		}
		out = append(out, p.ID)
		if d.model != "" && caps.HasRuntime(label) {
			withModel = append(withModel, p.ID)
		}
	}
	if len(withModel) > 0 {
		return withModel
	}
	return out
}

// poolCaps returns the capabilities of pool id in the copy.
func (h *Hub) poolCaps(pools []store.Pool, id string) bridge.Capabilities {
	if i := slices.IndexFunc(pools, func(p store.Pool) bool { return p.ID == id }); i >= 0 {
		return pools[i].Capabilities
	}
	return bridge.Capabilities{}
}
