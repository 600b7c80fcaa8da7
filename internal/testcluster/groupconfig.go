package testcluster

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SetGroupConfig sets the group config name of group to value (an
// IncrementalAlterConfigs of the group resource, as a share group's
// share.record.lock.duration.ms) on the plaintext cluster of brokers.
// It blocks until a broker answered, 30 s at most.
func SetGroupConfig(brokers []string, group, name, value string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Op, cfg.Value = name, kmsg.IncrementalAlterConfigOpSet, &value
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && len(resp.Resources) == 1 {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("set %s of group %s to %s: %w", name, group, value, err)
	}
	return nil
}
