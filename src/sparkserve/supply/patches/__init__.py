"""The patch series: its format, how it maps onto trees and wheels, apply/export/check."""
