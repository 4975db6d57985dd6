package cli

import (
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

func benchCmd(v *viper.Viper) *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "Measure capacity and quality of KV cache dtypes"}
}

func calibrateCmd(v *viper.Viper) *cobra.Command {
	return &cobra.Command{Use: "calibrate", Short: "Write static FP8 KV scales from a text sample"}
}
